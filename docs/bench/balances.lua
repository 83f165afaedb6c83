-- wrk script: GET /v1/billing/partner/balances with one API key (docs/bench/balances.sh fills
-- in CLIENT_ID and SECRET).
request = function()
  return wrk.format("GET", "/v1/billing/partner/balances", {["X-Client-Id"]="CLIENT_ID", ["X-Client-Secret"]="SECRET"})
end
done = function(summary, latency, requests)
  io.write(string.format("non2xx %d\n", summary.errors.status))
end
