"""Time series: LTSF CSVs and embedded series, the synthetic pretraining corpus, their windows and datamodules."""
