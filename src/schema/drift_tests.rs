//! Drift across file sequences (placeholder).
