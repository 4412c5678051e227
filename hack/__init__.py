"""hack: developer scripts (control-plane build, manifest generation); not part of the package."""
