"""kiln's tools: the command line (`kiln bench`), explain and dumps."""
