"""The user's inputs: the policy file, NCCL environment files and the TOML reader behind them.

Each reader refuses a bad file with a :class:`ccdiag.core.errors.UserInputError` naming what was
read, so the command line maps it to exit 2.
"""
