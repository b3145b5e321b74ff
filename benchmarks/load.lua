-- Request script for wrk (Debian's wrk 4.1 with LuaJIT), used by benchmarks/run.py.
--
-- Arguments after "--":  kind token prefix phone_base stride refs_file
--   kind       bare | echo | disburse | charge | getref | getpayout | replay
--   token      the Bearer key ("-" for none)
--   prefix     makes every Idempotency-Key of this run unique: <prefix>-<thread>-<counter>
--   phone_base first phone index for charges; thread t uses phone_base + t, + stride, ...
--   stride     the step between one thread's phone indexes: at least the -t value (run.py runs -t1
--              and passes 1, or N when N generators share a load, each starting one index further)
--   refs_file  one collection reference (getref), payout reference (getpayout) or replay key per line
--              ("-" for none)
--
-- The requests are the same as benchmarks/bench_load.py builds for its Python load generator.
-- done() prints one line "BENCH_RESULT {json}" that run.py reads.

local kind, token, prefix
local phone_base, stride = 0, 1
counter = 0 -- global: done() reads it through thread:get
local refs = {}
local threads = {}
local created = 0

function setup(thread)
   thread:set("thread_index", created)
   created = created + 1
   table.insert(threads, thread)
end

function init(args)
   kind = args[1]
   token = args[2]
   prefix = args[3]
   phone_base = tonumber(args[4])
   stride = tonumber(args[5])
   local refs_file = args[6]
   if refs_file ~= nil and refs_file ~= "-" then
      for line in io.lines(refs_file) do
         if #line > 0 then
            table.insert(refs, line)
         end
      end
   end
end

local function json_headers(key)
   return {
      ["Authorization"] = "Bearer " .. token,
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key,
   }
end

local function payout_body(key)
   return '{"amount":100,"currency":"XAF","phone":"670000100","merchantReference":"' .. key .. '"}'
end

-- The phone index of the n-th charge of this thread; indexes ending in 11, 12 or 13 are skipped
-- (the sandbox fails collections to those numbers).
local function phone_index()
   while true do
      counter = counter + 1
      local index = phone_base + thread_index + (counter - 1) * stride
      local tail = index % 100
      if tail < 11 or tail > 13 then
         return index
      end
   end
end

function request()
   if kind == "bare" then
      counter = counter + 1
      return wrk.format("GET", "/json")
   end
   if kind == "getref" then
      counter = counter + 1
      local ref = refs[(counter % #refs) + 1]
      return wrk.format("GET", "/v1/collect/" .. ref, { ["Authorization"] = "Bearer " .. token })
   end
   if kind == "getpayout" then
      counter = counter + 1
      local ref = refs[(counter % #refs) + 1]
      return wrk.format("GET", "/v1/disburse/" .. ref, { ["Authorization"] = "Bearer " .. token })
   end
   if kind == "replay" then
      counter = counter + 1
      local key = refs[(counter % #refs) + 1]
      return wrk.format("POST", "/v1/disburse", json_headers(key), payout_body(key))
   end
   if kind == "charge" then
      local index = phone_index()
      local key = prefix .. "-" .. thread_index .. "-" .. counter
      local phone = string.format("67%07d", index % 10000000)
      local body = '{"amount":100,"currency":"XAF","country":"CM","provider":"mtn_cm","phone":"'
         .. phone .. '","merchantReference":"' .. key .. '"}'
      return wrk.format("POST", "/v1/collect/charge", json_headers(key), body)
   end
   counter = counter + 1
   local key = prefix .. "-" .. thread_index .. "-" .. counter
   if kind == "echo" then
      return wrk.format("POST", "/echo", json_headers(key), payout_body(key))
   end
   return wrk.format("POST", "/v1/disburse", json_headers(key), payout_body(key))
end

function done(summary, latency, requests)
   local generated = 0
   for _, thread in ipairs(threads) do
      generated = generated + thread:get("counter")
   end
   local errors = summary.errors
   io.write(string.format(
      'BENCH_RESULT {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,'
         .. '"write_errors":%d,"status_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,'
         .. '"p99_us":%d,"max_us":%d,"mean_us":%.1f,"generated":%d}\n',
      summary.requests, summary.duration, errors.connect, errors.read, errors.write, errors.status,
      errors.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency.max, latency.mean, generated
   ))
end
