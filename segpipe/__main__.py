from segpipe.cli import entry

entry()
