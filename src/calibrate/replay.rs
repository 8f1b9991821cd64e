//! What replaying a measured run needs from the scenario layer: the
//! importers sit below scenarios and cannot resolve one, so the drivers that
//! replay (fit, convert, the calibration matrix) hand them this.

use std::path::Path;

/// The KV blocks `scenario_yaml` resolves to (its `engine.num_gpu_blocks`,
/// given or computed), the scenario named `name`; an error says which field
/// and why. Passed to `workload::import::silicon::load`.
pub fn kv_blocks(scenario_yaml: &str, name: &str) -> Result<u32, String> {
    let spec: crate::scenario::ScenarioSpec = crate::yaml::parse(scenario_yaml).map_err(|e| e.message)?;
    let d = crate::scenario::resolve(spec, Path::new("."), name).map_err(|e| format!("{}: {}", e.field, e.reason))?;
    Ok(d.serving().engine.num_gpu_blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::import::silicon;
    use crate::workload::{LlmCall, NodeKind, Request};

    /// The one llm call of a replayed request.
    fn call(q: &Request) -> Option<&LlmCall> {
        q.sub_requests.iter().find_map(|s| match &s.kind {
            NodeKind::Llm(l) => Some(l),
            _ => None,
        })
    }

    const CSV_HEADER: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms\n";

    fn dir_with(rows: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-silicon-unit-{}-{}", std::process::id(), rows.len()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("silicon_sample.csv"), format!("{CSV_HEADER}{rows}")).unwrap();
        dir
    }

    #[test]
    fn each_protocol_replays_its_counts_lengths_and_engine() {
        let dir = dir_with(concat!(
            "a,source_file=2026-04-06.csv; silicon_concurrency=4; measured=2025-10-29T00:00:00.000Z,vllm,,meta-llama/Llama-3.1-70B,h100_sxm,fp8,agg,1024,1024,4,2,50,20\n",
            "b,source_file=2026-04-06.csv; silicon_concurrency=4; measured=2026-02-01T00:00:00.000Z,vllm,,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,1024,1024,4,2,50,20\n",
            "c,source_file=/x/aic-auto-gap-analysis/q.csv; silicon_concurrency=3,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,100,10,3,2,40,12\n",
            "d,source_file=2026-04-06.csv; silicon_concurrency=64; measured=2025-10-29T00:00:00.000Z,vllm,,meta-llama/Llama-3.1-70B,h100_sxm,fp8,agg,8192,1024,64,2,59175,40\n",
        ));
        let names = silicon::list(&dir).unwrap();
        assert_eq!(names.len(), 4);
        // A before 2026-01-21: no warm-ups, 10c ranged requests, the recipe.
        let a = silicon::load(&dir, &names[0], kv_blocks).unwrap();
        assert_eq!((a.protocol, a.warmups.len(), a.workload.len()), (silicon::Protocol::InferenceX, 0, 40));
        for q in &a.workload {
            let l = call(q).unwrap();
            assert!((819..=1024).contains(&l.input_tokens) && (819..=1024).contains(&l.output_tokens));
        }
        let y = &a.scenario_yaml;
        assert!(y.contains("enable_prefix_caching: false") && y.contains("max_num_batched_tokens: 8192"), "{y}");
        assert!(y.contains("max_num_seqs: 4") && y.contains("max_model_len: 10240"), "{y}");
        // Four requests fit in a 16-bit KV cache: its size is left as computed.
        assert!(!y.contains("num_gpu_blocks"), "{y}");
        // 64 requests of up to 9,216 tokens on two H100s do not: the FP8 cache's blocks.
        let d = silicon::load(&dir, &names[3], kv_blocks).unwrap();
        assert!(d.scenario_yaml.contains("num_gpu_blocks:"), "{}", d.scenario_yaml);
        // No release named: vLLM 0.10.2 (the 70B workflow's image) decides the
        // scheduler, not the FP8 table (an inference): 0.24's FP8 GEMMs.
        assert!(!y.contains("fp8_gemm_release"), "{y}");
        // A after it: 2c warm-ups, all the first measured request's prompt and lengths; H200 has no 0.14 table.
        let b = silicon::load(&dir, &names[1], kv_blocks).unwrap();
        assert_eq!((b.warmups.len(), b.workload.len()), (8, 40));
        let first = call(&b.workload[0]).unwrap();
        for w in &b.warmups {
            let l = call(w).unwrap();
            assert_eq!((&l.input_token_ids, l.output_tokens), (&first.input_token_ids, first.output_tokens));
        }
        assert!(!b.scenario_yaml.contains("fp8_gemm_release") && b.scenario_yaml.contains("max_model_len: 2068"));
        // B: fixed lengths plus Qwen3's 8 template tokens, 2c warm-ups, AIC's engine.
        let c = silicon::load(&dir, &names[2], kv_blocks).unwrap();
        assert_eq!((c.protocol, c.warmups.len(), c.workload.len()), (silicon::Protocol::AicGapAnalysis, 6, 30));
        for q in c.warmups.iter().chain(&c.workload) {
            let l = call(q).unwrap();
            assert_eq!((l.input_tokens, l.output_tokens), (108, 10));
        }
        let y = &c.scenario_yaml;
        assert!(!y.contains("gpu_memory_utilization") && y.contains("max_num_batched_tokens: 1603"), "{y}");
        assert!(y.contains("max_model_len: 1618") && y.contains("async_scheduling: false"), "{y}");
        assert_eq!(c.max_request_tokens, 118);
        // Deterministic.
        let again = silicon::load(&dir, &names[0], kv_blocks).unwrap();
        assert_eq!(format!("{:?}", again.workload), format!("{:?}", a.workload));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
