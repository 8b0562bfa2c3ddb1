-- Argo CD health of tokenfleet.io/ModelRoute (Lua 5.1, as Argo CD runs it).
-- Healthy: Ready (every target served, the classifier's weights load). Progressing: not
-- reported for this generation yet. Degraded: a target missing, the route's name taken by a
-- served model, or the classifier's ConfigMap missing or invalid; the message says which.
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
  hs.message = ready.message or ""
  return hs
end
hs.status = "Degraded"
hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
return hs
