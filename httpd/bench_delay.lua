-- httpd/bench.sh's wrk script for `/delay/<ms>`: at the end, one line with the latency
-- distribution in microseconds (wrk's own, from each request's write to its response),
-- including the minimum, which says whether any response came before the delay.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "delay-latency-us min %d p50 %d p99 %d max %d requests %d errors %d\n",
    latency.min, latency:percentile(50), latency:percentile(99), latency.max,
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout))
end
