"""On-demand power: slurmctld's SuspendProgram/ResumeProgram/ResumeFailProgram (`slurmkit power ...`) and the
providers that switch a node on or off (``lab``, ``command``, ``redfish``)."""
