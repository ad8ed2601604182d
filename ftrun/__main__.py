from ftrun.errors import exit_on_signal

exit_on_signal()  # a Ctrl-C while the CLI is still importing: one line, exit 130

from ftrun.entry import main  # noqa: E402

main()
