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

}  // namespace trainplan::testing
