-- wrk script: POST /v1/billing/partner/licenses on one account, a fresh idempotency key per
-- request. Replace CLIENT_ID and SECRET with an API key of a reseller holding plan `bench` and
-- a registered login `alice` (docs/performance.md, "Outside check"), then:
--   wrk -t2 -c8 -d10s --latency -s docs/bench/license-hot.lua http://127.0.0.1:8080
local counter = 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  math.randomseed(os.time() + tid * 7919)
  prefix = "wrk-" .. tid .. "-" .. math.random(1, 1000000000) .. "-"
end
request = function()
  counter = counter + 1
  local body = '{"planSlug":"bench","login":"alice","idempotencyKey":"' .. prefix .. counter .. '"}'
  return wrk.format("POST", "/v1/billing/partner/licenses", {["Content-Type"]="application/json", ["X-Client-Id"]="CLIENT_ID", ["X-Client-Secret"]="SECRET"}, body)
end
done = function(summary, latency, requests)
  io.write(string.format("non2xx: %d\n", summary.errors.status))
end
