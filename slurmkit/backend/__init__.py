"""The only code that talks to Slurm: one protocol, a CLI implementation, pure parsers, one subprocess choke point."""
