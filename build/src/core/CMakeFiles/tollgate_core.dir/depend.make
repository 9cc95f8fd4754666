# Empty dependencies file for tollgate_core.
# This may be replaced when dependencies are built.
