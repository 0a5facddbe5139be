-- wrk script: GET / with X-Client-Id taken from a counter over CLIENTS distinct clients
-- (100000 by default); each wrk thread starts at its own offset.
local clients = tonumber(os.getenv("CLIENTS") or "100000")
local threads = 0
local counter = 0

function setup(thread)
  thread:set("offset", threads * 7919)
  threads = threads + 1
end

function init(args)
  counter = offset or 0
end

function request()
  counter = counter + 1
  return wrk.format("GET", "/", { ["X-Client-Id"] = "c" .. (counter % clients) })
end
