file(REMOVE_RECURSE
  "libtollgate_core.a"
)
