"""
Which implementation computes the biLM's products where (see `products.Kernels`): the CPU's
float32 choices (oneDNN, MKL's packed product), opt-in reduced precision, and the two
directions side by side. The network blocks ask here and contain no backend code.
"""
