# The VM's startup script (main.tf puts it into the instance metadata; it runs as root at every boot).
# Every value that reaches it is checked by a validation block in variables.tf, and is single-quoted
# here for the shell as well, so even a value that slipped past a validation stays one word of data.
# tests/static/test_infrastructure.py renders it with `terraform console` and hostile values.
locals {
  startup_values = {
    repository_url    = var.repository_url
    repository_commit = var.repository_commit
    run_prefix        = "gs://${var.output_bucket}/${var.name}"
    sync_minutes      = tostring(var.sync_minutes)
    wandb_secret_id   = var.wandb_secret_id
    project_id        = var.project_id
    nvidia_driver     = var.nvidia_driver
  }
  # 'value' with each ' written as '\'' : a POSIX shell single-quoted word.
  startup_script = templatefile("${path.module}/startup.sh.tftpl", merge(
    { for name, value in local.startup_values : name => format("'%s'", replace(value, "'", "'\\''")) },
    { overrides = join(" ", [for o in var.overrides : format("'%s'", replace(o, "'", "'\\''"))]) },
  ))
}
