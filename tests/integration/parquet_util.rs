//! Reads Parquet files back in tests, as rows of strings.

use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
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

/// The whole file: its Arrow schema as text (names, types, nullability) and
/// every row of every column as text.
pub fn read_table(path: &Path) -> (String, Vec<Vec<String>>) {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
    let schema = builder
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}:{}", f.name(), f.data_type(), f.is_nullable()))
        .collect::<Vec<_>>()
        .join(";");
    let mut rows = Vec::new();
    for batch in builder.build().unwrap() {
        let batch: RecordBatch = batch.unwrap();
        for i in 0..batch.num_rows() {
            rows.push(batch.columns().iter().map(|c| cell(c.as_ref(), i)).collect());
        }
    }
    (schema, rows)
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
    if let Some(a) = col.as_any().downcast_ref::<BooleanArray>() {
        return a.value(i).to_string();
    }
    match col.data_type() {
        DataType::Dictionary(_, _) => {
            let d = col.as_dictionary::<Int32Type>();
            cell(d.values().as_ref(), d.keys().value(i) as usize)
        }
        DataType::List(_) => {
            let list = col.as_list::<i32>().value(i);
            let items: Vec<String> = (0..list.len()).map(|j| cell(list.as_ref(), j)).collect();
            format!("[{}]", items.join(","))
        }
        other => panic!("unexpected column type {other:?}"),
    }
}
