# Empty dependencies file for tollgate_config.
# This may be replaced when dependencies are built.
