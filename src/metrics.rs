//! Run metrics.
