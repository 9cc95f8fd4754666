// tollgated: parses the options and runs the daemon. Everything else lives in Daemon.
#include <spdlog/spdlog.h>

#include <exception>
#include <iostream>

#include "daemon.h"
#include "daemon_options.h"
#include "tollgate/config_error.h"

int main(int argc, char** argv) {
  tollgate::DaemonOptions options;
  if (const auto exit_code = tollgate::parse_daemon_options(argc, argv, &options)) return *exit_code;
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  try {
    tollgate::Daemon daemon(options);
    return daemon.run();
  } catch (const tollgate::ConfigError& e) {
    std::cerr << "tollgated: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tollgated: " << e.what() << "\n";
    return 1;
  }
}
