//! Installing an extension folder into `$ZOT_HOME/extensions/` or a project.
