"""``slurmkit discover``: describe this node as an inventory node-group fragment.

``gather`` does the I/O (sysfs, psutil, NVML, /proc/net/route) into plain records; ``convert`` turns those
records into the fragment and is pure, so it is tested with a fake NVML and a fake sysfs tree.
"""

from slurmkit.discover.convert import Facts, fragment, render_fragment  # noqa: F401
from slurmkit.discover.gather import gather  # noqa: F401
