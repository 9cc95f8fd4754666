file(REMOVE_RECURSE
  "libtollgate_config.a"
)
