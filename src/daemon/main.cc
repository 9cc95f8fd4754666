// tollgated: parses the options and runs the daemon. Everything else lives in Daemon.
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
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
    // Asio gives a signal its default action back when the last set catching it is destroyed, and
    // the default action of SIGTERM is to die (status 143). The daemon's own set goes with the
    // daemon, before the process has exited: a second SIGTERM in between would turn a clean leave
    // into a kill. This set is never destroyed (reachable from a static, so no leak is reported),
    // so the signals stay caught to the end; the daemon's set (made first, so a signal during
    // startup reaches it) decides what they do while it runs.
    static auto* const keep_caught_io = new boost::asio::io_context;
    static auto* const keep_caught = new boost::asio::signal_set(*keep_caught_io, SIGTERM, SIGINT, SIGHUP);
    (void)keep_caught;
    return daemon.run();
  } catch (const tollgate::ConfigError& e) {
    std::cerr << "tollgated: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tollgated: " << e.what() << "\n";
    return 1;
  }
}
