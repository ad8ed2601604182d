"""Reading torch-profiler chrome traces without torch: decode, extract torchft spans, find files."""
