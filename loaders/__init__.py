"""Getting weights onto disk and into NumPy: machinery to take on trust, behind utils.py.

    download.py       OpenAI's release files over HTTP, into NAME.part, renamed NAME once complete
    hub.py            model names, the Hugging Face cache and the Hugging Face Hub
    tf_checkpoint.py  OpenAI's TensorFlow checkpoint, read with NumPy alone
    hf_folder.py      a Hugging Face folder: config.json + model.safetensors
    weights.py        what every reader checks: hyperparameters, names and shapes, tensors read into float32
    matrix_memory.py  where the readers put the blocks' matrices: one array, in Linux's 2 MB pages
    safe_files.py     every write a fresh file renamed into place, a lock per file between runs
    messages.py       how a value or an operating-system error is quoted in a one-line error
    random_weights.py random weights of any size, as the readers give them: for tests, tools and benchmarks

utils.py is the one entry point: a name becomes a folder (resolve_model), a folder a model (load_model).
"""
