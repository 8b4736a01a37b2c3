"""The tools: scripts that measure the code and make the README's figures, apart from the code a learner reads.

Read the top-level files first (the README's file map gives the order); come here to see how a number in
docs/BENCHMARKS.md or a figure in img/ was made. Each script runs from the repository's root as
`python tools/NAME.py` and puts the root on the import path itself; the tests import them as `tools.NAME`.

    make_readme_figures.py   the ONE command that writes every generated part of README.md and docs/BENCHMARKS.md,
                             with measured_parts.py, main_runs.py, small_parts.py (the parts) and pages.py
                             (writing them)
    worked_round.py          the README's worked round (two rounds with numbers) and its two pictures
    random_models.py         random-weight GPT-2 folders of the real shapes, for the README's sample run
    benchmark_forward.py     the forward pass's speed against the memory-bandwidth floor, r(m), the context
                             (its tables and plots: forward_tables.py)
    pass_parts.py            a pass over m positions part by part, against the r(m) it should reach
    compare_llama_cpp.py     side by side with llama.cpp on the same weights (written by gguf_file.py)
    machine.py               which machine a measurement ran on, and how busy it was (every timed table quotes it)
    measure_loading.py       peak memory and time of loading weights, in fresh processes
    measure_hf_speed.py      Hugging Face transformers on the same machine, for scale (needs torch)
    compare_drafters.py      the drafter and tree tables of `python tools/benchmark.py --drafters ... --trees ...`
    benchmark_plots.py       tools/benchmark.py's pictures, and the plotting helpers the tools share
    benchmark_text.py        prompt lookup on real text (tools/texts/): tokens per pass, alpha by match, speedup
    benchmark.py             when speculative sampling pays off: alpha, c, r and the speedup of each K, plotted
    reading_path.py          how many lines of the core one `python main.py` run takes a learner through
    time_grading.py          how long a class takes to grade, every step of N copies through the gradebook

What the tools share with the tests lives here too, since a test may import a tool and a tool never imports a
test: model_files.py (GPT-2 weights written in the two real formats), release_files.py (where OpenAI's files
are), markov.py (the hand-made Markov models), peers.py (tiktoken, encoder.py's peer), full_scan_lookup.py
(prompt lookup by its definition) and recorded.py (numbers a test records, read from a run of it).
"""
