-- Health of a Kubeflow Training Operator job (PyTorchJob, TFJob, MPIJob; kubeflow.org/v1).
-- The operator reports progress as status.conditions of type Created, Running, Restarting,
-- Succeeded, Failed and Suspended, each with status "True" or "False".
--   Succeeded -> Healthy, Failed -> Degraded, Suspended -> Suspended, anything else -> Progressing.
-- Argo CD runs this with the live object in `obj` and reads hs.status and hs.message.
local hs = {}
hs.status = "Progressing"
hs.message = "Waiting for the Training Operator to start the job"
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local current = {}
for _, condition in ipairs(obj.status.conditions) do
  if condition.status == "True" and condition.type ~= nil then
    current[condition.type] = condition
  end
end
local function message(condition, fallback)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  return fallback
end
if current["Failed"] ~= nil then
  hs.status = "Degraded"
  hs.message = message(current["Failed"], "The job failed")
elseif current["Succeeded"] ~= nil then
  hs.status = "Healthy"
  hs.message = message(current["Succeeded"], "The job succeeded")
elseif current["Suspended"] ~= nil then
  hs.status = "Suspended"
  hs.message = message(current["Suspended"], "The job is suspended")
elseif current["Restarting"] ~= nil then
  hs.message = message(current["Restarting"], "The job is restarting")
elseif current["Running"] ~= nil then
  hs.message = message(current["Running"], "The job is running")
elseif current["Created"] ~= nil then
  hs.message = message(current["Created"], "The job is created")
end
return hs
