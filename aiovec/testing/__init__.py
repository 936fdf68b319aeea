"""Environments for testing vector envs (and code built on them): deterministic, seedable, small.

``EpisodeEnv`` exercises every batching path (Box, Discrete, Dict and Tuple spaces; episodes
ending by termination and by truncation; infos of many types). ``CountingEnv`` counts what was
done to it, so a test can prove a rejected call touched nothing. ``FaultyEnv`` fails on purpose
(raises, hangs, exits, kills itself, returns unpicklable values) and ``FaultLedger`` records
what it did across restarts, for fault-injection tests. ``ProcessTreeEnv`` starts helper
processes of every awkward kind (daemons, SIGTERM-ignoring grandchildren) and
``tagged_processes`` finds them wherever they end up. ``AsyncAdapter`` turns any of them
(any env) into a coroutine env for the async backend.
"""

from aiovec.testing._async import AsyncAdapter as AsyncAdapter
from aiovec.testing._envs import SPACE_KINDS as SPACE_KINDS
from aiovec.testing._envs import CountingEnv as CountingEnv
from aiovec.testing._envs import EpisodeEnv as EpisodeEnv
from aiovec.testing._faults import FAULT_KINDS as FAULT_KINDS
from aiovec.testing._faults import Fault as Fault
from aiovec.testing._faults import FaultLedger as FaultLedger
from aiovec.testing._faults import FaultyEnv as FaultyEnv
from aiovec.testing._faults import InjectedFault as InjectedFault
from aiovec.testing._faults import hangs_in_progress as hangs_in_progress
from aiovec.testing._faults import release_hangs as release_hangs
from aiovec.testing._process_tree import HELPER_KINDS as HELPER_KINDS
from aiovec.testing._process_tree import ProcessTreeEnv as ProcessTreeEnv
from aiovec.testing._process_tree import tagged_processes as tagged_processes

__all__ = (
    "FAULT_KINDS",
    "HELPER_KINDS",
    "SPACE_KINDS",
    "AsyncAdapter",
    "CountingEnv",
    "EpisodeEnv",
    "Fault",
    "FaultLedger",
    "FaultyEnv",
    "InjectedFault",
    "ProcessTreeEnv",
    "hangs_in_progress",
    "release_hangs",
    "tagged_processes",
)
