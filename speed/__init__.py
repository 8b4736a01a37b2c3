"""How the pass runs fast on this machine: machinery to take on trust, read after the model.

    plug.py          the seam: what model_fn.create_model_fn hands gpt2.py in place of the plain weights, cache
                     and attention (python main.py --plain runs without it)
    products.py      how a weight matrix is stored (column-major) and multiplied (`matmul`), so that a pass
                     over a few positions costs about what one costs; attention's heads shared with the helper
    layouts.py       whether a matrix is stored by column or by row on this machine: measured before a model
                     is read, kept with the routes
    second_core.py   the helper processes on the other cores: forked copies of the program, each multiplying
                     a share of every matrix's columns and attending with a share of the heads, through shared
                     memory; how many is measured (routes.py)
    shared_cache.py  the KV cache's buffer in memory the helpers map, and what a program's own fork does to it
    routes.py        which route each product takes on this machine (panels, matrix-vector products, one BLAS
                     call, padded rows): measured in a few seconds at a model's first run, kept as routes.json
    openblas_env.py  OpenBLAS's setting, made before NumPy loads it, so that its idle threads sleep at once
    calibration.py   r(m), c and o timed on this machine for K="auto", and the costs file that keeps them

gpt2.py imports nothing of this: plug.py imports gpt2 and plugs into it from outside. Importing this package
imports nothing (main.py imports speed.openblas_env before NumPy).
"""
