// The email preview frame. It is loaded with sandbox="allow-scripts" (an opaque origin: it cannot read the
// dashboard, its storage or the API key) and its own Content-Security-Policy, under which the email's
// scripts never run and nothing is fetched from the network. The dashboard posts the html here.
window.addEventListener('message', (event) => {
  if (event.source !== window.parent || typeof event.data?.html !== 'string') return;
  document.open();
  document.write(event.data.html);
  document.close();
});
window.parent.postMessage({ previewReady: true }, '*');
