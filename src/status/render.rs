//! Renders the policy as Markdown, JSON or Graphviz dot (`kim policy`).
