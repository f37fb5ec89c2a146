"""`python -m windjoin.pipelines` runs the windjoin command line."""

from windjoin.pipelines.cli.main import main

main()
