// A test helper for the plan file (core/plan.h plan_to_json / plan_from_json): one plan enum
// field's file form, as each field's own test checks it.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "core/json_util.h"
#include "core/plan.h"

namespace trainplan::testing {

// `set` has `member` at `value` (its file spelling), `unset` at the default: the default is not
// written; `value` is written under `field` and read back to the same member; `bad` in its place
// is refused, the message naming the field and the value.
template <typename T>
void expect_plan_choice_in_file(const Plan& set, const Plan& unset, T Plan::*member,
                                const std::string& field, const std::string& value,
                                const std::string& bad) {
  SCOPED_TRACE(field);
  EXPECT_FALSE(plan_to_json(unset).contains(field));
  const Json j = plan_to_json(set);
  EXPECT_EQ(j.at(field), value);
  const Result<Plan> back = plan_from_json(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ((*back).*member, set.*member);
  Json wrong = j;
  wrong[field] = bad;
  const Result<Plan> refused = plan_from_json(wrong, "p.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(field), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find(bad), std::string::npos)
      << refused.status().message();
}

// `base` with `field` set to `value` (its file spelling) loads with `member` at `expected`, writes
// `value` back under `field`, shows `describe_token` (e.g. " attention=flash1") in describe(), and
// reads its own file back to the same file. The value-by-value check of a field whose loader test
// lists every value (loaders_test).
template <typename T>
void expect_plan_choice_loads(const Json& base, T Plan::*member, const std::string& field,
                              const std::string& value, T expected,
                              const std::string& describe_token) {
  SCOPED_TRACE(field + "=" + value);
  Json j = base;
  j[field] = value;
  const Result<Plan> p = plan_from_json(j, "p.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ((*p).*member, expected);
  EXPECT_EQ(plan_to_json(*p).at(field), value);
  EXPECT_NE(describe(*p).find(describe_token), std::string::npos) << describe(*p);
  const Result<Plan> back = plan_from_json(plan_to_json(*p), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*p));
}

}  // namespace trainplan::testing
