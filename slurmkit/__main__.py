from slurmkit.cli.main import main

main()
