"""The words every room speaks: findings, readings and read errors, probe names, link rates,
outliers, errors and exit codes, bounded file reading and output.

Leaves: a module here imports only other modules here, so any room may use them.
"""
