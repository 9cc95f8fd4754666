// The HTTP front end's bearer token (tollgated's --http-token-file): one line of an RFC 6750
// token, read at start and on SIGHUP.
#ifndef TOLLGATE_SRC_HTTP_TOKEN_FILE_H_
#define TOLLGATE_SRC_HTTP_TOKEN_FILE_H_

#include <optional>
#include <string>

namespace tollgate::http {

// The token in the file at `path`: its one line without the line end, 16 to 512 characters of
// A-Z a-z 0-9 - . _ ~ + / followed by any '=' (RFC 6750's b64token). Throws ConfigError naming
// the file and, for a bad character, its position.
std::string read_token_file(const std::string& path);

// A warning for the log when others than the file's owner and group can read it (anyone who
// reads it can spend every key over HTTP); nullopt otherwise.
std::optional<std::string> token_file_warning(const std::string& path);

}  // namespace tollgate::http

#endif  // TOLLGATE_SRC_HTTP_TOKEN_FILE_H_
