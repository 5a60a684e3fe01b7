"""Multi-table time-series EHR data: tables, generator, MIMIC-IV reader, cohort, folder format, serialization."""
