# Empty dependencies file for tollgate-debt-demo.
# This may be replaced when dependencies are built.
