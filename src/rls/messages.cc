#include "rls/messages.h"

#include <algorithm>

#include "core/clock.h"

namespace tollgate::rls {
namespace {

namespace pb = envoy::service::ratelimit::v3;

// The limit's name as a structured-field string ("..."): printable ASCII with '"' and '\\'
// escaped; a name with anything else is shown as "default".
std::string header_name(const std::string& name) {
  std::string out = "\"";
  for (const char c : name) {
    if (c < 0x20 || c > 0x7e) return "\"default\"";
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return name.empty() ? "\"default\"" : out + "\"";
}

void set_duration(google::protobuf::Duration* d, int64_t ns) {
  d->set_seconds(ns / kNanosPerSecond);
  d->set_nanos(int32_t(ns % kNanosPerSecond));
}

void add_header(pb::RateLimitResponse& response, const std::string& key, const std::string& value) {
  pb::HeaderValue* h = response.add_response_headers_to_add();
  h->set_key(key);
  h->set_value(value);
}

// The IETF draft's fields (draft-ietf-httpapi-ratelimit-headers) for the descriptor that denied,
// or else the limited one with the least room left relative to its burst.
void add_ratelimit_headers(const std::vector<DescriptorResult>& results, pb::RateLimitResponse& response) {
  const DescriptorResult* pick = nullptr;
  double pick_room = 2;
  for (const DescriptorResult& r : results) {
    if (!r.limit || !r.limit->limited() || r.until_full_ns < 0) continue;
    if (r.code == Code::kOverLimit) {
      pick = &r;
      break;
    }
    const double room = double(r.remaining) / double(r.limit->bucket.burst);
    if (room < pick_room) {
      pick = &r;
      pick_room = room;
    }
  }
  if (!pick) return;
  const RlsLimit& l = *pick->limit;
  const std::string name = header_name(l.name);
  add_header(response, "RateLimit-Policy",
             name + ";q=" + std::to_string(l.bucket.burst) +
                 ";w=" + std::to_string(l.bucket.rate.period_ns / kNanosPerSecond));
  const int64_t reset_ns = pick->code == Code::kOverLimit ? pick->retry_after_ns : pick->until_full_ns;
  std::string fields = name + ";r=" + std::to_string(pick->remaining);
  if (reset_ns != kRetryNever) fields += ";t=" + std::to_string(ceil_seconds(reset_ns));
  add_header(response, "RateLimit", fields);
  if (pick->code == Code::kOverLimit && pick->retry_after_ns != kRetryNever) {
    add_header(response, "Retry-After", std::to_string(std::max<int64_t>(1, ceil_seconds(pick->retry_after_ns))));
  }
}

pb::MetadataValue& add_field(pb::Metadata& m, const std::string& key) {
  pb::Metadata::Field* f = m.add_fields();
  f->set_key(key);
  return *f->mutable_value();
}

// Which limits denied, in the response's dynamic metadata (a Struct to Envoy, rls.proto's
// Metadata here): Envoy keeps it under the rate limit filter's namespace, where an access log
// (%DYNAMIC_METADATA(envoy.filters.http.ratelimit:over_limit)%) or a later filter reads it. A
// limit without a name is told by its descriptor's position.
void name_the_denials(const std::vector<DescriptorResult>& results, pb::RateLimitResponse& response) {
  pb::MetadataList* list = nullptr;
  for (size_t i = 0; i < results.size(); ++i) {
    const DescriptorResult& r = results[i];
    if (r.code != Code::kOverLimit) continue;
    if (!list) list = add_field(*response.mutable_dynamic_metadata(), "over_limit").mutable_list_value();
    pb::Metadata& one = *list->add_values()->mutable_struct_value();
    add_field(one, "descriptor").set_number_value(double(i));
    if (r.concurrency_over) {  // tollgate's concurrency limit: at most this many in flight
      add_field(one, "concurrency").set_number_value(double(r.concurrency_limit));
    } else if (r.limit) {
      add_field(one, "name").set_string_value(r.limit->name);
      add_field(one, "requests_per_unit").set_number_value(double(r.limit->requests_per_unit));
      add_field(one, "unit").set_string_value(rls_unit_name(r.limit->unit));
      if (r.limit->unit_multiplier != 1)
        add_field(one, "unit_multiplier").set_number_value(double(r.limit->unit_multiplier));
    }
  }
}

void set_value(const RlsValue& v, pb::MetadataValue& out);

// Merges the mapping `from` into `into`: a key `into` lacks is added; where both hold a mapping
// they are merged; otherwise the value already there stays (the earlier descriptor's).
void merge_map(const RlsValue& from, pb::Metadata& into) {
  for (size_t i = 0; i < from.names.size(); ++i) {
    const RlsValue& v = from.items[i];
    auto have = std::find_if(into.mutable_fields()->begin(), into.mutable_fields()->end(),
                             [&](const pb::Metadata::Field& f) { return f.key() == from.names[i]; });
    if (have == into.mutable_fields()->end()) {
      set_value(v, add_field(into, from.names[i]));
    } else if (v.kind == RlsValue::Kind::kMap && have->value().has_struct_value()) {
      merge_map(v, *have->mutable_value()->mutable_struct_value());
    }
  }
}

void set_value(const RlsValue& v, pb::MetadataValue& out) {
  switch (v.kind) {
    case RlsValue::Kind::kNull:
      out.set_null_value(0);
      break;
    case RlsValue::Kind::kBool:
      out.set_bool_value(v.boolean);
      break;
    case RlsValue::Kind::kNumber:
      out.set_number_value(v.number);
      break;
    case RlsValue::Kind::kString:
      out.set_string_value(v.text);
      break;
    case RlsValue::Kind::kList:
      for (const RlsValue& item : v.items) set_value(item, *out.mutable_list_value()->add_values());
      out.mutable_list_value();  // an empty list is still a list
      break;
    case RlsValue::Kind::kMap:
      merge_map(v, *out.mutable_struct_value());
      break;
  }
}

}  // namespace

void add_limit_headers(const std::vector<DescriptorResult>& results, const std::string& limit_name,
                       const std::string& remaining_name, const std::string& reset_name,
                       pb::RateLimitResponse& response) {
  const DescriptorResult* pick = nullptr;
  for (const DescriptorResult& r : results) {
    if (!r.limit || !r.limit->limited()) continue;
    if (!pick || r.remaining < pick->remaining) pick = &r;
  }
  for (const DescriptorResult& r : results) {
    if (r.limit && r.limit->limited() && r.code == Code::kOverLimit && !r.quota) pick = &r;
  }
  if (!pick) return;
  add_header(response, limit_name, std::to_string(pick->limit->requests_per_unit));
  add_header(response, remaining_name, std::to_string(pick->remaining));
  if (pick->until_full_ns >= 0) add_header(response, reset_name, std::to_string(ceil_seconds(pick->until_full_ns)));
}

void add_request_metadata(const pb::RateLimitRequest& request, const Plan& plan,
                          const std::vector<DescriptorResult>& results, pb::RateLimitResponse& response) {
  pb::Metadata& m = *response.mutable_dynamic_metadata();
  add_field(m, "domain").set_string_value(request.domain());
  pb::MetadataList& list = *add_field(m, "descriptors").mutable_list_value();
  for (const pb::RateLimitDescriptor& d : request.descriptors()) {
    pb::Metadata& one = *list.add_values()->mutable_struct_value();
    pb::MetadataList& entries = *add_field(one, "entries").mutable_list_value();
    for (const auto& e : d.entries()) entries.add_values()->set_string_value(e.key() + "=" + e.value());
    if (d.has_hits_addend()) add_field(one, "hitsAddend").set_number_value(double(d.hits_addend().value()));
  }
  if (request.hits_addend() != 0) add_field(m, "hitsAddend").set_number_value(double(request.hits_addend()));
  pb::Metadata merged;
  for (size_t i = 0; i < plan.descriptors.size() && i < results.size(); ++i) {
    const RlsValue* meta = plan.descriptors[i].match.metadata;
    if (meta && results[i].code != Code::kOverLimit) merge_map(*meta, merged);
  }
  if (merged.fields_size() > 0) *add_field(m, "metadata").mutable_struct_value() = std::move(merged);
}

int64_t ceil_seconds(int64_t ns) { return ns <= 0 ? 0 : ns / kNanosPerSecond + (ns % kNanosPerSecond != 0); }

std::string plan_from_message(const pb::RateLimitRequest& request, std::shared_ptr<const RlsConfig> config,
                              size_t max_key_bytes, Plan& plan) {
  std::vector<DescriptorInput> inputs(size_t(std::min(request.descriptors_size(), int(kMaxDescriptors) + 1)));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const pb::RateLimitDescriptor& d = request.descriptors(int(i));
    DescriptorInput& in = inputs[i];
    if (d.has_limit()) {
      RlsLimitOverride& o = in.limit.emplace();
      o.requests_per_unit = d.limit().requests_per_unit();
      // An enum value this proto does not know reads as itself: RlsConfig refuses it as no unit.
      o.unit = d.limit().unit() >= 0 && d.limit().unit() <= 7 ? RlsUnit(d.limit().unit()) : RlsUnit::kUnknown;
      o.unit_multiplier = d.limit().has_unit_multiplier() ? d.limit().unit_multiplier().value() : 1;
    }
    in.entries.reserve(size_t(std::min(d.entries_size(), int(kMaxEntries) + 1)));
    for (int j = 0; j < d.entries_size() && in.entries.size() <= kMaxEntries; ++j) {
      in.entries.push_back({d.entries(j).key(), d.entries(j).value()});
    }
    if (d.has_hits_addend()) {
      in.has_hits = true;
      in.hits = d.hits_addend().value();
    }
    in.is_negative_hits = d.is_negative_hits();
  }
  return plan_request(std::move(config), request.domain(), request.hits_addend(), inputs, max_key_bytes, plan);
}

void fill_response(Code overall, const std::vector<DescriptorResult>& results, bool headers,
                   pb::RateLimitResponse& response) {
  response.set_overall_code(overall == Code::kOk ? pb::RateLimitResponse::OK : pb::RateLimitResponse::OVER_LIMIT);
  for (const DescriptorResult& r : results) {
    pb::RateLimitResponse::DescriptorStatus* s = response.add_statuses();
    s->set_code(r.code == Code::kOk ? pb::RateLimitResponse::OK : pb::RateLimitResponse::OVER_LIMIT);
    s->set_limit_remaining(r.remaining);
    if (r.limit) {
      pb::RateLimitResponse::RateLimit* l = s->mutable_current_limit();
      l->set_requests_per_unit(r.limit->requests_per_unit);
      l->set_unit(pb::RateLimitResponse::RateLimit::Unit(r.limit->unit));
      l->set_name(r.limit->name);
      if (r.limit->unit_multiplier != 1) l->mutable_unit_multiplier()->set_value(r.limit->unit_multiplier);
    }
    if (r.until_full_ns >= 0) set_duration(s->mutable_duration_until_reset(), r.until_full_ns);
  }
  if (headers) add_ratelimit_headers(results, response);
  if (overall == Code::kOverLimit) name_the_denials(results, response);
}

}  // namespace tollgate::rls
