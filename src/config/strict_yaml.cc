#include "config/strict_yaml.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <sstream>

#include "tollgate/config_error.h"

namespace tollgate::yaml {
namespace {

// Counts the first document's nodes as the parser streams them, without building any, and stops
// at the first one past the limit.
class NodeCounter final : public YAML::EventHandler {
 public:
  struct TooMany {
    YAML::Mark at;
  };
  explicit NodeCounter(size_t max_nodes) : max_(max_nodes) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& at, YAML::anchor_t) override { add(at); }
  void OnAlias(const YAML::Mark& at, YAML::anchor_t) override { add(at); }
  void OnScalar(const YAML::Mark& at, const std::string&, YAML::anchor_t, const std::string&) override { add(at); }
  void OnSequenceStart(const YAML::Mark& at, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    add(at);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& at, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    add(at);
  }
  void OnMapEnd() override {}

 private:
  void add(const YAML::Mark& at) {
    if (++count_ > max_) throw TooMany{at};
  }
  const size_t max_;
  size_t count_ = 0;
};

}  // namespace

YAML::Node load(std::string_view text, const std::string& source) {
  try {
    // yaml-cpp keeps hundreds of bytes per node: a 4 MiB flow sequence of empty maps (`[{},{},
    // ...]`) took 660 MB to load. Counted first, streaming, so such a document is refused before
    // any memory grows with it (issue 34, finding 6).
    // The same pass refuses a quoted value left open: yaml-cpp 0.7 takes end of input inside a
    // quoted scalar as its end when the text ends with a line break (`domain: "web` and a
    // newline loads as "web "), but refuses it ("illegal EOF in scalar") when it does not. A
    // comment after the last line break changes nothing else and gives it the case it refuses.
    std::string counted(text);
    if (!counted.empty() && counted.back() == '\n') counted += '#';
    std::istringstream in{std::move(counted)};
    YAML::Parser parser(in);
    NodeCounter counter(kMaxNodes);
    parser.HandleNextDocument(counter);
    return YAML::Load(std::string(text));
  } catch (const NodeCounter::TooMany& e) {
    throw ConfigError(source, e.at.line + 1, e.at.column + 1,
                      "more than " + std::to_string(kMaxNodes) +
                          " YAML nodes (values, lists and mappings): refused before loading; split the file or "
                          "use a rule with a wildcard");
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

void fail(const std::string& source, const YAML::Mark& at, const std::string& problem) {
  if (at.is_null()) throw ConfigError(source, 0, 0, problem);
  throw ConfigError(source, at.line + 1, at.column + 1, problem);
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace tollgate::yaml
