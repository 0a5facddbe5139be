-- soak_quota.lua — wrk script of the soak (soak.sh): GET /api/soak with one
-- X-API-Key per wrk thread; every 200's admission time (the server's "ok
-- at=NS" body) goes to $SOAK_OUT/quota-<key>.txt for soak_check.py.
local threads = {}
local counter = 0

function setup(thread)
    counter = counter + 1
    thread:set("key", "soak-client-" .. counter)
    table.insert(threads, thread)
end

function init(args)
    wrk.headers["X-API-Key"] = key
    out = io.open(os.getenv("SOAK_OUT") .. "/quota-" .. key .. ".txt", "w")
    out:setvbuf("line")
    req = wrk.format("GET", "/api/soak")
end

function request()
    return req
end

function response(status, headers, body)
    if status == 200 then
        out:write(body:match("at=(%d+)"), "\n")
    elseif status ~= 429 then
        out:write("status ", status, "\n")
    end
end
