// A scripted HTTP server for the rules retriever's tests: it accepts one connection on
// 127.0.0.1 (a port of the kernel's choosing, in the caller's io_context), reads the request
// head, then writes `answer` (unless empty: then it holds the connection open without a word)
// and closes.
#ifndef TOLLGATE_TESTS_SUPPORT_SCRIPTED_HTTP_SERVER_H_
#define TOLLGATE_TESTS_SUPPORT_SCRIPTED_HTTP_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <string>

#include "retriever/rules_retriever.h"

namespace tollgate::testing {

class ScriptedServer {
 public:
  using tcp = boost::asio::ip::tcp;
  ScriptedServer(boost::asio::io_context& io, std::string answer)
      : acceptor_(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)),
        socket_(io),
        answer_(std::move(answer)) {
    acceptor_.async_accept(socket_, [this](const boost::system::error_code& ec) {
      if (ec) return;
      boost::asio::async_read_until(socket_, boost::asio::dynamic_buffer(request_), "\r\n\r\n",
                                    [this](const boost::system::error_code& read, size_t) {
        if (read || answer_.empty()) return;
        boost::asio::async_write(socket_, boost::asio::buffer(answer_),
                                 [this](const boost::system::error_code&, size_t) { socket_.close(); });
      });
    });
  }
  HttpUrl url() const {
    const std::string port = std::to_string(acceptor_.local_endpoint().port());
    return HttpUrl{false, "127.0.0.1", port, "/rules.yaml", "127.0.0.1:" + port};
  }
  const std::string& request() const { return request_; }

 private:
  tcp::acceptor acceptor_;
  tcp::socket socket_;
  std::string answer_;
  std::string request_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_SCRIPTED_HTTP_SERVER_H_
