// The one error type for every file tollgate reads (rules, config, peers): the message starts
// with "FILE:LINE:COLUMN: " so an operator can go straight to the problem.
#ifndef TOLLGATE_CONFIG_ERROR_H_
#define TOLLGATE_CONFIG_ERROR_H_

#include <stdexcept>
#include <string>

namespace tollgate {

class ConfigError : public std::runtime_error {
 public:
  // `line` and `column` are 1-based; 0 leaves them out of the message.
  ConfigError(const std::string& file, int line, int column, const std::string& problem)
      : std::runtime_error(format(file, line, column, problem)), file_(file), line_(line) {}

  const std::string& file() const { return file_; }
  int line() const { return line_; }

 private:
  static std::string format(const std::string& file, int line, int column, const std::string& problem) {
    std::string where = file;
    if (line > 0) where += ":" + std::to_string(line);
    if (line > 0 && column > 0) where += ":" + std::to_string(column);
    return where + ": " + problem;
  }
  std::string file_;
  int line_;
};

}  // namespace tollgate

#endif  // TOLLGATE_CONFIG_ERROR_H_
