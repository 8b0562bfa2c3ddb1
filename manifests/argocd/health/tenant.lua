-- Argo CD health of tokenfleet.io/Tenant (Lua 5.1, as Argo CD runs it).
-- Healthy: Ready (it has API keys). Degraded: Ready is False — a tenant without keys cannot
-- call anything, and the message says how to create one. Progressing: not reported yet.
local hs = {}
local status = obj.status
local ready = nil
if status ~= nil and status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type == "Ready" then ready = c end
  end
end
local generation = obj.metadata and obj.metadata.generation
if ready == nil or (generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation)) then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report"
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
else
  hs.status = "Degraded"
end
hs.message = ready.message or ""
return hs
