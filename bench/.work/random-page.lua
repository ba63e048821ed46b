
local counter = 0
function setup(thread) counter = counter + 1; thread:set("id", counter) end
function init(args) math.randomseed(os.time() * 1000 + id) end
function request()
  return wrk.format(nil, "/feeds/big/archives/" .. math.random(1, 299) .. "/")
end
