//! Reads Parquet files back in tests, as rows of strings.

use std::fs::File;
use std::path::Path;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The named columns of every row, as text (floats with Rust's shortest form, nulls as "null").
pub fn read_columns(path: &Path, names: &[&str]) -> Vec<Vec<String>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    let mut rows = Vec::new();
    for batch in reader {
        let batch: RecordBatch = batch.unwrap();
        for i in 0..batch.num_rows() {
            rows.push(names.iter().map(|n| cell(batch.column_by_name(n).unwrap().as_ref(), i)).collect());
        }
    }
    rows
}

fn cell(col: &dyn Array, i: usize) -> String {
    if col.is_null(i) {
        return "null".to_owned();
    }
    if let Some(a) = col.as_any().downcast_ref::<StringArray>() {
        return a.value(i).to_owned();
    }
    if let Some(a) = col.as_any().downcast_ref::<Float64Array>() {
        return format!("{}", a.value(i));
    }
    if let Some(a) = col.as_any().downcast_ref::<Int64Array>() {
        return a.value(i).to_string();
    }
    panic!("unexpected column type {:?}", col.data_type())
}
