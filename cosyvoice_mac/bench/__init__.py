"""The measuring code: speed, memory, floors and op counts of the models, and the benchmark's command line.

    python -m cosyvoice_mac.bench --help        (bash run.sh bench)

``measure`` times one configuration stage by stage; ``cli`` picks the configurations, runs each in its own
process and prints the table; ``floors`` measures how fast each stage could be here; ``decode`` and
``opcount`` count what one decoding step costs; ``memory`` follows a worker's peak memory. The scripts in
the repository's ``bench/`` folder build on these.

Importing any of them first gives this process the worker's environment (a user's own values win), before
torch loads OpenMP, so that the bench measures what the worker runs.
"""

import os

from cosyvoice_mac.engine.worker import unset_worker_environment  # torch-free

os.environ.update(unset_worker_environment())
