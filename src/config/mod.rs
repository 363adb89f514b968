//! Units operators write in configs and on the command line: rates, sizes.
