#!/bin/bash
# Slurm Epilog: after each job, drain the node if `ccdiag check` finds it broken (an XID the job
# hit, a GPU that fell off the bus), with ccdiag's reason. Same script as the prolog; install both
# side by side. Environment: as ccdiag-prolog.sh.
CCDIAG_STAGE=epilog exec /bin/bash "$(dirname "$(readlink -f "$0")")/ccdiag-prolog.sh" "$@"
