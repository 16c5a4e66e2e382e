-- Health of a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1, release v2.3.0).
-- Argo CD ships none (argoproj/argo-cd@v3.6.2:resource_customizations has no trainer.kubeflow.org).
-- status.conditions has three types only (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/
-- trainjob_types.go): Complete and Failed, copied from the JobSet with its reason and message
-- (pkg/runtime/framework/plugins/jobset/jobset.go, Status), and Suspended (reason Suspended,
-- message "TrainJob is suspended"; False with reason Resumed once it runs; pkg/controller/
-- trainjob_controller.go). A TrainJob that Kueue queues stays suspended until admitted.
-- Running has no condition: status.jobsStatus counts each replicated job's pods, and the alpha
-- status.trainerStatus (feature gate TrainJobStatus) reports progress, time left and metrics.
--   Failed -> Degraded, Complete -> Healthy, suspended -> Suspended, anything else -> Progressing.
-- Only Lua's base and table libraries are available (argo-cd util/lua/lua.go without useOpenLibs).
local hs = {}
local current = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.status == "True" and condition.type ~= nil then
      current[condition.type] = condition
    end
  end
end
local function text(condition, fallback)
  local out = fallback
  if condition.message ~= nil and condition.message ~= "" then
    out = condition.message
  end
  if condition.reason ~= nil and condition.reason ~= "" then
    out = condition.reason .. ": " .. out
  end
  return out
end
if current["Failed"] ~= nil then
  hs.status = "Degraded"
  hs.message = text(current["Failed"], "The TrainJob failed")
  return hs
end
if current["Complete"] ~= nil then
  hs.status = "Healthy"
  hs.message = text(current["Complete"], "The TrainJob completed")
  return hs
end
if current["Suspended"] ~= nil or (obj.spec ~= nil and obj.spec.suspend == true) then
  hs.status = "Suspended"
  hs.message = "The TrainJob is suspended"
  if current["Suspended"] ~= nil and current["Suspended"].message ~= nil then
    hs.message = current["Suspended"].message
  end
  if obj.metadata ~= nil and obj.metadata.labels ~= nil and obj.metadata.labels["kueue.x-k8s.io/queue-name"] ~= nil then
    hs.message = hs.message .. " (queued in Kueue LocalQueue " .. obj.metadata.labels["kueue.x-k8s.io/queue-name"] .. " until it is admitted)"
  end
  return hs
end
hs.status = "Progressing"
local parts = {}
if obj.status ~= nil and obj.status.trainerStatus ~= nil then
  local ts = obj.status.trainerStatus
  local progress = ""
  if ts.progressPercentage ~= nil then
    progress = tostring(ts.progressPercentage) .. "% done"
  end
  if ts.estimatedRemainingSeconds ~= nil then
    local seconds = ts.estimatedRemainingSeconds
    local minutes = (seconds - seconds % 60) / 60
    local left = tostring(seconds) .. " s left"
    if minutes >= 1 then
      left = "about " .. tostring(minutes) .. " min left"
    end
    if progress ~= "" then
      progress = progress .. ", " .. left
    else
      progress = left
    end
  end
  if progress ~= "" then
    table.insert(parts, progress)
  end
  if ts.metrics ~= nil then
    local metrics = {}
    for _, metric in ipairs(ts.metrics) do
      if metric.name ~= nil and metric.value ~= nil then
        table.insert(metrics, metric.name .. " " .. tostring(metric.value))
      end
    end
    if table.getn(metrics) > 0 then
      table.insert(parts, table.concat(metrics, ", "))
    end
  end
end
if obj.status ~= nil and obj.status.jobsStatus ~= nil then
  for _, job in ipairs(obj.status.jobsStatus) do
    local active = job.active or 0
    local ready = job.ready or 0
    local succeeded = job.succeeded or 0
    local failed = job.failed or 0
    local line = tostring(job.name) .. ": " .. tostring(active) .. " active, " .. tostring(ready) .. " ready, " .. tostring(succeeded) .. " succeeded"
    if failed > 0 then
      line = line .. ", " .. tostring(failed) .. " failed"
    end
    table.insert(parts, line)
  end
end
if table.getn(parts) > 0 then
  hs.message = "Running: " .. table.concat(parts, "; ")
else
  hs.message = "Waiting for Kubeflow Trainer to create the JobSet"
end
return hs
