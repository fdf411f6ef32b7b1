"""Reading results: speed-of-light and peer benches, held-out evaluation, repeatability, database
status, table listings and the kernel catalogue."""
