//! The embedded GPU catalog: datasheet numbers only (dense tensor-core peaks,
//! no sparsity), each with the datasheet it came from. Efficiency factors are
//! not hardware facts and live with the latency model that uses them.

/// One GPU model, as its datasheet describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// Catalog name, e.g. `H100`.
    pub name: &'static str,
    /// Memory the driver reports, bytes (what vLLM's `gpu_memory_utilization`
    /// is a fraction of).
    pub memory_bytes: u64,
    /// Peak HBM/GDDR bandwidth, bytes/s.
    pub memory_bandwidth: f64,
    /// Dense FP16/BF16 tensor-core peak, FLOP/s.
    pub bf16_flops: f64,
    /// Dense FP8 tensor-core peak, FLOP/s; `None` where the GPU has no FP8
    /// tensor cores (vLLM then runs FP8 weights through a weight-only kernel
    /// at the BF16 rate).
    pub fp8_flops: Option<f64>,
    /// GPU-to-GPU bandwidth for tensor-parallel all-reduce, bytes/s per
    /// direction (NVLink where the GPU has it, else PCIe).
    pub interconnect_bandwidth: f64,
    /// GPUs of one node, which share `interconnect_bandwidth` (one NVLink
    /// domain, or one PCIe host).
    pub gpus_per_node: u64,
    /// The network between nodes, for a tensor- (or expert-) parallel group
    /// larger than one node; `None` where the catalog knows no standard
    /// multi-node system for the GPU (such groups are refused).
    pub inter_node: Option<InterNode>,
}

/// The network between nodes, as one GPU sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterNode {
    /// Bandwidth of the GPU's own network adapter, bytes/s per direction.
    pub bandwidth: f64,
    /// Time one step of a ring collective takes to cross the network,
    /// beyond the data it carries, µs.
    pub latency_us: f64,
}

/// NCCL's own model of a network step of a ring all-reduce (low-latency
/// protocol, the one small messages use): 2.7 µs (NVIDIA/nccl
/// `src/graph/tuning.cc`, `hwLat[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_LL]`),
/// against 0.47 µs for an NVLink step. It includes the NIC's PCIe trip and
/// the switch; an InfiniBand NDR switch alone adds well under 1 µs.
const NCCL_NET_STEP_US: f64 = 2.7;

const GB: f64 = 1e9;
const TB: f64 = 1e12;
const TFLOPS: f64 = 1e12;
const MIB: u64 = 1 << 20;
/// 1 Gb/s in bytes/s.
const GBIT: f64 = 1e9 / 8.0;

/// GPUs of one node for the PCIe cards: the most PCIe GPUs NVIDIA's server
/// reference designs hold (8x L40S in an OVX server; RTX PRO Servers with up
/// to 8 RTX PRO 6000), used for the RTX 4090 too. Their multi-node networks
/// vary by vendor and none is catalogued: a group beyond one node is refused.
const PCIE_SERVER_GPUS: u64 = 8;

/// Every GPU in the catalog, with the names users may type for it.
const CATALOG: &[(&[&str], Gpu)] = &[
    // NVIDIA H100 SXM5 datasheet (nvidia.com/en-us/data-center/h100): BF16 1,979 and
    // FP8 3,958 TFLOPS *with sparsity*, so half dense; 3.35 TB/s HBM3; NVLink 900 GB/s
    // total (450 GB/s per direction). 81,559 MiB is what nvidia-smi reports for the
    // 80 GB part (also ../shared/data/blis-vllm-h100/h100-sxm-datasheet.json).
    // Nodes: NVIDIA DGX H100 datasheet (HGX H100 8-GPU): 8 GPUs on NVLink/NVSwitch, and
    // for the compute fabric 8x single-port ConnectX-7 VPI, up to 400 Gb/s InfiniBand or
    // Ethernet: one 400 Gb/s adapter per GPU.
    (
        &["H100", "H100-SXM", "H100-SXM5", "H100-80G"],
        Gpu {
            name: "H100",
            memory_bytes: 81_559 * MIB,
            memory_bandwidth: 3.35 * TB,
            bf16_flops: 989.4 * TFLOPS,
            fp8_flops: Some(1978.9 * TFLOPS),
            interconnect_bandwidth: 450.0 * GB,
            gpus_per_node: 8,
            inter_node: Some(InterNode { bandwidth: 400.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    // NVIDIA H200 SXM datasheet (nvidia.com/en-us/data-center/h200): same Hopper compute
    // as H100 (BF16 989 / FP8 1,979 dense), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s.
    // 143,771 MiB is the driver-reported size of the 141 GB part.
    // Nodes: NVIDIA DGX H200 datasheet (HGX H200 8-GPU): 8 GPUs, 8x single-port
    // ConnectX-7 VPI at 400 Gb/s InfiniBand/Ethernet for the compute fabric.
    (
        &["H200", "H200-SXM"],
        Gpu {
            name: "H200",
            memory_bytes: 143_771 * MIB,
            memory_bandwidth: 4.8 * TB,
            bf16_flops: 989.4 * TFLOPS,
            fp8_flops: Some(1978.9 * TFLOPS),
            interconnect_bandwidth: 450.0 * GB,
            gpus_per_node: 8,
            inter_node: Some(InterNode { bandwidth: 400.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    // NVIDIA A100 80GB SXM datasheet: BF16 312 TFLOPS dense, 2,039 GB/s HBM2e, NVLink
    // 600 GB/s total (300 per direction); no FP8 tensor cores. 81,920 MiB reported.
    // Nodes: NVIDIA DGX A100 datasheet (HGX A100 8-GPU): 8 GPUs, 8x single-port
    // ConnectX-6 VPI at 200 Gb/s HDR InfiniBand for the compute fabric.
    (
        &["A100-80G", "A100-SXM", "A100-80GB", "A100"],
        Gpu {
            name: "A100-80G",
            memory_bytes: 81_920 * MIB,
            memory_bandwidth: 2.039 * TB,
            bf16_flops: 312.0 * TFLOPS,
            fp8_flops: None,
            interconnect_bandwidth: 300.0 * GB,
            gpus_per_node: 8,
            inter_node: Some(InterNode { bandwidth: 200.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    // NVIDIA L40S datasheet: BF16 362.05 / FP8 733 TFLOPS dense (half the sparsity
    // figures 733 / 1,466), 48 GB GDDR6 at 864 GB/s, no NVLink: PCIe Gen4 x16, 32 GB/s
    // per direction. 46,068 MiB reported.
    (
        &["L40S"],
        Gpu {
            name: "L40S",
            memory_bytes: 46_068 * MIB,
            memory_bandwidth: 864.0 * GB,
            bf16_flops: 362.05 * TFLOPS,
            fp8_flops: Some(733.0 * TFLOPS),
            interconnect_bandwidth: 32.0 * GB,
            gpus_per_node: PCIE_SERVER_GPUS,
            inter_node: None,
        },
    ),
    // NVIDIA HGX B200 datasheet (per GPU): FP16/BF16 2.25 PFLOPS and FP8 4.5 PFLOPS
    // dense, 180 GB HBM3e at 7.7 TB/s, NVLink 5 1.8 TB/s total (900 GB/s per direction).
    // 183,359 MiB reported. Nodes: NVIDIA DGX B200 datasheet: 8 GPUs, 8x single-port
    // ConnectX-7 VPI at 400 Gb/s InfiniBand/Ethernet (4x OSFP) for the compute fabric.
    (
        &["B200"],
        Gpu {
            name: "B200",
            memory_bytes: 183_359 * MIB,
            memory_bandwidth: 7.7 * TB,
            bf16_flops: 2250.0 * TFLOPS,
            fp8_flops: Some(4500.0 * TFLOPS),
            interconnect_bandwidth: 900.0 * GB,
            gpus_per_node: 8,
            inter_node: Some(InterNode { bandwidth: 400.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    // NVIDIA GB200 NVL72 spec ("Individual Blackwell GPU": FP16/BF16 5, FP8 10 PFLOPS
    // with sparsity, so 2.5 / 5 dense; 186 GB HBM3E at 8 TB/s; NVLink 5 1.8 TB/s total,
    // 900 GB/s per direction). Sources differ: third-party tables copying HGX B200's
    // row give 2.25 PF BF16, and early GTC-2024 material 192 GB (the raw HBM); NVIDIA's
    // current table and aiconfigurator's `gb200.yaml` agree on the figures used here.
    // 189,471 MiB is what nvidia-smi reports (aiconfigurator's yaml, public dumps).
    // NVLink domain: the 72-GPU rack (18 trays of 4 behind 9 NVLink switch trays).
    // Between racks: NVIDIA DGX SuperPOD GB200 reference architecture, NDR 400 Gb/s
    // InfiniBand, one ConnectX-7 port per GPU.
    (
        &["GB200", "GB200-NVL72"],
        Gpu {
            name: "GB200",
            memory_bytes: 189_471 * MIB,
            memory_bandwidth: 8.0 * TB,
            bf16_flops: 2500.0 * TFLOPS,
            fp8_flops: Some(5000.0 * TFLOPS),
            interconnect_bandwidth: 900.0 * GB,
            gpus_per_node: 72,
            inter_node: Some(InterNode { bandwidth: 400.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    // Blackwell Ultra, as aiconfigurator's `b300_sxm.yaml` and `gb300.yaml` (commit
    // 095f58a) take them from NVIDIA's Blackwell Ultra datasheet (not cross-checked
    // against a second source here): B300 (HGX, 8 GPUs) 275,040 MiB reported by
    // nvidia-smi (288 GB HBM3e), 7.75 TB/s, dense BF16 2.25 / FP8 4.5 PF; GB300 (NVL72)
    // 284,208 MiB, 8 TB/s, 2.5 / 5 PF. NVLink 5, 900 GB/s per direction. Network: one
    // ConnectX-8 at 800 Gb/s per GPU (the GB300 NVL72 and HGX B300 reference designs).
    (
        &["B300", "B300-SXM"],
        Gpu {
            name: "B300",
            memory_bytes: 275_040 * MIB,
            memory_bandwidth: 7.75 * TB,
            bf16_flops: 2250.0 * TFLOPS,
            fp8_flops: Some(4500.0 * TFLOPS),
            interconnect_bandwidth: 900.0 * GB,
            gpus_per_node: 8,
            inter_node: Some(InterNode { bandwidth: 800.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    (
        &["GB300", "GB300-NVL72"],
        Gpu {
            name: "GB300",
            memory_bytes: 284_208 * MIB,
            memory_bandwidth: 8.0 * TB,
            bf16_flops: 2500.0 * TFLOPS,
            fp8_flops: Some(5000.0 * TFLOPS),
            interconnect_bandwidth: 900.0 * GB,
            gpus_per_node: 72,
            inter_node: Some(InterNode { bandwidth: 800.0 * GBIT, latency_us: NCCL_NET_STEP_US }),
        },
    ),
    // NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090: FP16/BF16 tensor
    // 165.2 TFLOPS and FP8 330.3 TFLOPS dense with FP32 accumulate (what vLLM's kernels
    // use); 24 GB GDDR6X at 1,008 GB/s; PCIe Gen4 x16, 32 GB/s per direction.
    // 24,564 MiB reported.
    (
        &["RTX4090", "RTX-4090"],
        Gpu {
            name: "RTX4090",
            memory_bytes: 24_564 * MIB,
            memory_bandwidth: 1008.0 * GB,
            bf16_flops: 165.2 * TFLOPS,
            fp8_flops: Some(330.3 * TFLOPS),
            interconnect_bandwidth: 32.0 * GB,
            gpus_per_node: PCIE_SERVER_GPUS,
            inter_node: None,
        },
    ),
    // NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 4 PFLOPS FP4 with
    // sparsity, so FP8 1,007.6 and BF16 503.8 TFLOPS dense; 96 GB GDDR7 at 1,792 GB/s;
    // PCIe Gen5 x16, 64 GB/s per direction. 97,887 MiB reported.
    (
        &["RTXPRO6000", "RTX-PRO-6000"],
        Gpu {
            name: "RTXPRO6000",
            memory_bytes: 97_887 * MIB,
            memory_bandwidth: 1792.0 * GB,
            bf16_flops: 503.8 * TFLOPS,
            fp8_flops: Some(1007.6 * TFLOPS),
            interconnect_bandwidth: 64.0 * GB,
            gpus_per_node: PCIE_SERVER_GPUS,
            inter_node: None,
        },
    ),
];

/// Looks a GPU up by any of its names, ignoring case.
pub fn lookup(name: &str) -> Option<Gpu> {
    CATALOG.iter().find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(name))).map(|(_, gpu)| gpu.clone())
}

/// `hardware: custom`: a server no datasheet here describes — vLLM on a
/// CPU, an accelerator not catalogued. It has no peaks to price a step
/// with, so only a fitted model prices it (the linear one), and no memory
/// to size a KV cache from, so the scenario gives `num_gpu_blocks` (vLLM's
/// /metrics `cache_config_info` reports it) and the batch limits.
pub const CUSTOM: &str = "custom";

/// The [`CUSTOM`] device: one engine of unknown peaks, whose memory bounds
/// nothing (the KV blocks are given).
pub fn custom() -> Gpu {
    Gpu {
        name: CUSTOM,
        memory_bytes: u64::MAX,
        memory_bandwidth: 0.0,
        bf16_flops: 0.0,
        fp8_flops: None,
        interconnect_bandwidth: 0.0,
        gpus_per_node: 1,
        inter_node: None,
    }
}

/// The canonical names, for error messages and `--help`.
pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|(_, gpu)| gpu.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_the_same_gpu() {
        assert_eq!(lookup("h100-sxm"), lookup("H100"));
        assert_eq!(lookup("A100-SXM").unwrap().name, "A100-80G");
        assert!(lookup("V100").is_none());
        assert_eq!(names().len(), 10);
    }

    /// HGX/DGX nodes of 8 with a 400 Gb/s adapter a GPU (200 Gb/s on A100):
    /// 50 GB/s a GPU between nodes against 450 GB/s of NVLink within.
    #[test]
    fn nvlink_gpus_have_nodes_of_8_and_a_network_between_them() {
        for (gpu, gbit) in [("H100", 400.0), ("H200", 400.0), ("B200", 400.0), ("A100-80G", 200.0)] {
            let g = lookup(gpu).unwrap();
            let net = g.inter_node.unwrap();
            assert_eq!((g.gpus_per_node, net.bandwidth), (8, gbit * 1e9 / 8.0), "{gpu}");
            assert!(net.bandwidth * 5.0 < g.interconnect_bandwidth && (1.0..10.0).contains(&net.latency_us));
        }
        assert_eq!(lookup("H100").unwrap().inter_node.unwrap().bandwidth, 50e9);
        for gpu in ["L40S", "RTX4090", "RTXPRO6000"] {
            let g = lookup(gpu).unwrap();
            assert_eq!((g.gpus_per_node, g.inter_node), (8, None), "{gpu}");
        }
    }
}
