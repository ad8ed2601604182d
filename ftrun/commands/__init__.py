"""ftrun's commands: each module turns one command's parsed flags into a result and an exit code."""
