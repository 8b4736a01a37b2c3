"""The command line of main.py and of every script: machinery to take on trust, read after main.py.

    flags.py    fire's syntax read by hand, every flag checked before anything runs, errors as one line
    scripts.py  how every command starts and ends (run_script), and the flags the tools share
"""
