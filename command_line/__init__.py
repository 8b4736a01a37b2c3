"""The command line of main.py and of every script: machinery to take on trust, read after main.py.

    flags.py    main.py's flags, every value checked before anything runs, errors as one line
    checks.py   main.py's models loaded and checked (a shared tokenizer, the context, finite weights)
    warm_up.py  main.py's untimed warm-up, and what it measures and keeps in the target's folder
    report.py   what main.py prints: the heading, each run's line, the comparison at the end
    page.py     `python main.py --html FILE`: the run's rounds as one self-contained page (filling page.html)
    scripts.py  how every command reads its command line (fire's syntax), starts and ends, and the tools' own flags
"""
